"""The vLLM lock: one concrete release per recipe, variant and install, chosen once and committed, and the
complete hash-locked dependency set of every (release, platform, accelerator, Python) an image installs."""
