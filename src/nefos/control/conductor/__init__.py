"""The conductor: builds request specs, asks the scheduler, hands builds to computes, reschedules."""
