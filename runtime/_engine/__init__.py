"""The engine: `Engine`, the executor that runs one attempt, the worker, the lease watcher,
actions (resume, fork), outcomes, event streams, batches. The top room: it may import every other."""
