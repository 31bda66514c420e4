"""The reference population that ships with voxmeter (templates, never audio): see shipped.py."""
