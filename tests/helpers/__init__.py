"""What the template's tests share that is not a test: engines, commands."""
