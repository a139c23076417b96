//! Desired pod status and patch building.
