"""Models on the clouds' managed endpoints (invoke deploy): one module per service (SageMaker,
Vertex AI, Azure ML), each with the same names (SERVICE, BUCKET, PARTS; check, upload, create,
describe, predict, remove), and common.py for what they share: the instances and their prices
(endpoints.json), a deployment, its record."""

from types import ModuleType

from . import azureml, sagemaker, vertex

ENGINES: dict[str, ModuleType] = {"aws": sagemaker, "gcp": vertex, "azure": azureml}
