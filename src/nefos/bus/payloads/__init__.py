"""The typed, versioned payloads the bus carries (``base`` says what one is); a module per payload,
each with its version history. No database here: both sides of the bus import them."""
