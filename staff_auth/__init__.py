"""How staff (platform admins, tenant admins, operators) sign in to the admin and the console:
password sign-in with throttling, the page they land on, and single sign-on through the
company's OpenID Connect provider with groups deciding roles."""
