"""The controller: a level-triggered reconcile loop over runs, inside the service.

For each run that needs work it loads a view (`views.RunView`), asks the module of the run's
phase what to do (`queued`, `preparing`, `training`, `pausing`, `paused`, `terminal`: pure
functions, no I/O), makes the cluster calls the decision needs outside any transaction, and applies
the result in a short transaction (`apply`). Every phase change goes through `transitions.move`.
"""
