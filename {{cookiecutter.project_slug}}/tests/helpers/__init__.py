"""What the tests share that is not a test: stand-ins for the clouds' APIs, and the services."""
