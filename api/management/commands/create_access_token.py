"""``manage.py create_access_token <username> --name <name>``: a personal access token for
scripts (the raw token is printed once, alone on the last line)."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from api.services import access_token_create


class Command(BaseCommand):
    help = (
        "Create a personal access token for the REST API, acting as a user. "
        "The raw token is printed alone on the last line, once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", required=True, help="What the token is for, e.g. 'ci'.")
        parser.add_argument("--expires-at", help="ISO 8601 date-time, e.g. 2027-01-01T00:00:00Z")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user named {options['username']!r}.")
        expires_at = None
        if options["expires_at"]:
            expires_at = parse_datetime(options["expires_at"])
            if expires_at is None or expires_at.tzinfo is None:
                raise CommandError(
                    "--expires-at must be an ISO 8601 date-time with a time zone, e.g. 2027-01-01T00:00:00Z"
                )
        try:
            token, raw = access_token_create(user=user, name=options["name"], expires_at=expires_at)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        self.stdout.write(
            f"Created access token {token.name!r} for {user.get_username()} (prefix {token.prefix}). "
            "It is shown only now:"
        )
        self.stdout.write(raw)
