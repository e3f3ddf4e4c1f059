"""Pure data: hardware, model and drafter specs, and the catalog that finds them by name."""
from dsdsim.specs.catalog import hardware_names, load_hardware, load_model, model_names
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import ModelSpec

__all__ = ["HardwareSpec", "ModelSpec", "hardware_names", "load_hardware", "load_model", "model_names"]
