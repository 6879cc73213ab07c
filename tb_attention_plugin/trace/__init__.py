"""Reading a trace: stream a Kineto/Chrome JSON file into columnar records and link each GPU
kernel to its launch, CPU op stack and modules."""
