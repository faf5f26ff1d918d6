"""The run's randomness: keyed streams (:mod:`.streams`), their compiled generator (:mod:`.compiled`), the rounds'
participants and stragglers (:mod:`.rounds`) and the devices' batch plans (:mod:`.batch_plans`).

Every draw of a run comes from a stream keyed by ``(seed, stream, *keys)``, so a draw is a function of its key.
Torch-free at import (the workflow's planning reads :mod:`.rounds`)."""
