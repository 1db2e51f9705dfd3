"""Around the phases: events and hooks, callbacks, the stored event log, OpenTelemetry tracing."""
