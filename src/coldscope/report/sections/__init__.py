"""The report's sections, one module each: ``build(...)`` turns runs (grouped into
configurations) into the section's typed, frozen record, and ``draw(record)`` turns that record
into HTML. The page shell (``coldscope.report.html``) lays the drawn sections out in order."""
