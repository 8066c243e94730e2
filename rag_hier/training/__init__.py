"""Training (later issues: HCE, EHI, DHR, SVDR, Tied-Atomic)."""
