//! pods (node daemon; being written).
