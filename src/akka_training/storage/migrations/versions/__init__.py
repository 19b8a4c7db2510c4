"""The schema's migrations, one file each, named for what it creates or changes.

The revision ids inside (``0002_14``, ``0004_h22_rest``, ...) stay as they were first released:
a database records the id it is at, and a renamed id would leave it unable to upgrade."""
