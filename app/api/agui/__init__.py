"""AG-UI (DESIGN §16): POST /ag-ui speaks the Agent–User Interaction protocol with its own
package (`ag-ui-protocol`'s models and encoder). Imported only when the route is first used
(`app.api.routes.agui`), so serving without it costs nothing: `turns` reads the input,
`body` checks a new run's configuration as POST /runs does, `session` decides what a turn is
and streams it, `decisions` turns a turn's answers to interrupts into the run's decisions,
`mapping` turns finishline's events into the protocol's."""
