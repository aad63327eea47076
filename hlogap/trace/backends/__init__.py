"""Backend readers, one module each (cpu, gpu, tpu), found through `base.register`."""
