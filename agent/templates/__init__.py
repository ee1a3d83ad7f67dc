"""Templates of a task: rendering (`render`), the change_mode state machine (`changemode`) and the
per-task runner that renders over time and delivers one action per change (`runner`)."""
