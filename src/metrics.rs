//! metrics (node daemon; being written).
