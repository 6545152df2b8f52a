"""The outside's side of talking to an invocation: sending messages, requests and reading published
values (`_asking`), and the checks on resolving its promises (`_requests`)."""
