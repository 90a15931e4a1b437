"""The evaluated services of this code location, one folder each with its ``defs.yaml``
(``ragspine_pipeline.RagEvaluation``). ``dg scaffold defs ragspine_pipeline.RagEvaluation NAME`` adds one."""
