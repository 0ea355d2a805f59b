"""Following a run (DESIGN §19): its event log read page by page (`log`), the one follow
loop every face uses, to the run's end or its wait for a person (`follower`), and an event's time
as the wire gives it (`wiretime`)."""
