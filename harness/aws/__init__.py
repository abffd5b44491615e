"""The AWS target: a fleet deployed by terraform, run and broken as a topology of the scenario runner.

``deployment`` reads terraform's outputs and checks the guardrails (``preflight``); ``topology`` is the
deployed fleet as a ``Topology`` (STARTs through the signed router, faults through ECS and FIS); ``fis``
writes the experiment templates; ``cost`` estimates a run's bill; ``logs`` reads the history back from
CloudWatch Logs, which ``log_shipper`` fills for the offline ``standin`` (moto and local processes in AWS's
place).  It sits above the scenarios it runs and below the reports and the command line.
"""
