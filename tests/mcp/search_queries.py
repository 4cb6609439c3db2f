"""Twenty queries for the search tool over GitHub's REST API as imported (prefix ``gh_``),
written from the operations' summaries and descriptions in other words, with the tool each
should find."""

QUERIES: list[tuple[str, str]] = [
    ("remove the people assigned to an issue", "gh_issues_remove-assignees"),
    ("add a comment to an issue", "gh_issues_create-comment"),
    ("star a gist", "gh_gists_star"),
    ("which labels does an issue have", "gh_issues_list-labels-on-issue"),
    ("delete a webhook of a repository", "gh_repos_delete-webhook"),
    ("add a GPG key to my own account", "gh_users_create-gpg-key-for-authenticated-user"),
    ("how much GitHub Actions cache an organization uses", "gh_actions_get-actions-cache-usage-for-org"),
    ("find issues and pull requests by keyword", "gh_search_issues-and-pull-requests"),
    ("the people a user follows", "gh_users_list-following-for-user"),
    ("merge a pull request", "gh_pulls_merge"),
    ("publish a new release of a repository", "gh_repos_create-release"),
    ("history of commits of a gist", "gh_gists_list-commits"),
    ("one delivery of a repository webhook", "gh_repos_get-webhook-delivery"),
    ("mark a notification thread as done", "gh_activity_mark-thread-as-done"),
    ("restore a deleted package I own", "gh_packages_restore-package-for-authenticated-user"),
    ("fork a repository", "gh_repos_create-fork"),
    ("workflow runs of a repository", "gh_actions_list-workflow-runs-for-repo"),
    ("store an encrypted Dependabot secret for a repository", "gh_dependabot_create-or-update-repo-secret"),
    ("deploy keys of a repository", "gh_repos_list-deploy-keys"),
    ("read the README of a repository", "gh_repos_get-readme"),
]
