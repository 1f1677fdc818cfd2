"""The base of every config section: typed, documented per field, unknown keys are errors."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section. Unknown keys fail loudly so a typo never silently keeps a default."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, use_attribute_docstrings=True, coerce_numbers_to_str=True
    )
