"""Threads (DESIGN §19): a conversation as a resource, an ordered line of runs, each
continuing from the one before it. `index` is the port every store implements (where each
owner's threads are: head, runs, times, metadata, changed by compare-and-set); `line` is the
runs layer's part (`Threads`) that starts a thread's next run, lists, reads, changes and
deletes threads, for the native API, AG-UI's threadId and A2A's contextId alike."""
