"""Enrolment: speech made into templates, above the store that keeps them.

From a corpus on disk (``voxmeter enroll``: features extracted through the cache, the
narrow-band, far-field and anonymised copies made while the audio is at hand) or from the
windows heard live; the store only writes and reads what this package hands it.
"""
