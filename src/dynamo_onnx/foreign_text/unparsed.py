"""A message that looks like one a reader reads but does not parse: kept, never dropped."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Unparsed:
    """A message that looks like one we read (``kind``) but did not parse: a wording this
    module does not know. Kept, so a finding can quote it rather than go quiet."""

    kind: str
    text: str
