"""Runs of several nodes on the clouds' training services: a plan as a SageMaker training job,
a Vertex AI custom job, an Azure ML command job or a SkyPilot task (one module each; engines.py
picks one, common.py holds what they share and imports none of them)."""
