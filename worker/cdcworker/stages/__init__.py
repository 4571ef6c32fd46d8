"""The stages of one worker task (``cdcworker.task.WorkerTask`` routes between them).

connect (VTGate channel, offsets store) -> resume (where to start) -> hand off (backfill states)
-> stream (one VStream connection at a time) -> commit (offsets and watermark at each flush) ->
stop (flush, store the durable position, close). ``outcomes`` maps what a stream raised to what
the task does next.
"""
