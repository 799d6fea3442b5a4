"""Raw tables -> summary tables and named metrics, per experiment family (used by notebooks and claims)."""
