"""Flow control: limits and budgets (`_limits/`), schedules (`_schedules/`) and the options an
invocation starts with. Imports only `_base` of the runtime's rooms."""
