"""Results for people and pipelines: the results table at the end of `orchestra run`
(summary), a job's aggregates (tables: per task, layer, class, failure mode, timings),
report.md and a self-contained report.html (render, with templating and templates/), the
paired memory-on vs off comparison (compare), JUnit XML (junit), every trial's trajectory
in ATIF into one folder (atif), the regression gate against a baseline job (gate), the live
progress of a running job (progress), and reading
job results back with errors that name the file (load)."""
