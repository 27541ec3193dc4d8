"""Anytime-valid statistics for runs that may stop early: confidence sequences for a run's
accuracy and a paired difference over a finite population of questions (`sequences`), and the
stopping rule's decision (`decide`). Pure functions over outcomes; numpy and pandas only."""
