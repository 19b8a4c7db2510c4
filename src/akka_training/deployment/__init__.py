"""The running deployment: the application context (settings, database, blob store, catalog,
pools, backend) that the request path and the controller share, and how it is built."""
