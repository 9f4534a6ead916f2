"""Code the example spiders share. Being in a subdirectory, it is not read
for spiders: netweir-serve only reads the .py files directly in a project's
directory."""
