"""What crosses modules: end-to-end runs, several processes, the layout of the package, quoted numbers."""
