"""What is attention: the vocabulary of phases, the name patterns, and the tagger that gives each
kernel its attention call, phase and direction."""
