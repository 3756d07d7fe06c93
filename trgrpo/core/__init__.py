"""The paper's core (Sections 2-3): Eq. 11 token weights, the Eq. 4-10 loss, the TRL trainer, the theory of Section 3
and the three readings of the printed equations."""
