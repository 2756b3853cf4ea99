"""The ground floor every stage stands on: the errors they share, the limits on what is read, how files are
touched (regular files only, atomic writes, a model's file names, a TVM library's manifest), text made safe for
a terminal, and the import of a package's self-registering modules. Nothing here imports a stage."""
