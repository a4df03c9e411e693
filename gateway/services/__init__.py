"""The four logical services and the base class they share."""
