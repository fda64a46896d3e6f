"""Render each problem file into its pair of Harbor task folders (CuTe DSL and TIRx)."""
