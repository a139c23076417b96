//! Sends desired status to the API server (being written).
