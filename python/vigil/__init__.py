"""vigil: report a training job's step readings to the node's vigil-agent.

    import vigil
    client = vigil.Client(job="llama-70b")     # rank etc. from the environment
    client.step(1200, loss=2.31, grad_norm=0.9)
    with client.checkpoint():
        save()

Stdlib only. vigil.torch.StepMonitor measures what PyTorch can tell by
itself (step time, tokens/s, MFU, GradScaler scale, CUDA memory). The
protocol is described in python/README.md.
"""

from vigil.client import DEFAULT_SOCKET, PHASES, STEP_FIELDS, Client

# The one place the version is set: pyproject.toml reads it from here.
__version__ = "0.1.0"

__all__ = ["Client", "DEFAULT_SOCKET", "PHASES", "STEP_FIELDS"]
