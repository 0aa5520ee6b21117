"""The trial relay (DESIGN 3.5): identities, a private channel, threaded messages with
mentions, and engram memory; served on the trial network's gateway, exported as evidence."""
