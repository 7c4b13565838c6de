"""Robot definitions: per robot an MJCF model, a constants module and a skill contract."""
