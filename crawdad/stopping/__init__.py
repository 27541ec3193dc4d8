"""Anytime-valid statistics for runs that may stop early: confidence sequences for a run's
accuracy and a paired difference over a finite population of questions (`sequences`),
sequential tests by betting for a paired difference (`betting`), and the stopping rule's
decision, one pure function of the outcomes (`decide.decision`). Pure functions over outcomes;
numpy and pandas only."""
