"""How runs end, measured (DESIGN §20).

summaries.py  `RunSummary`: one ended run in a line, its tally, and `RunFilter`
groups.py     `ReportBuilder`: summaries summed by model, agent, key or day
service.py    `Reports`: the report the API serves, and the summaries' backfill
"""
