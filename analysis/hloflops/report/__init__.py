"""What a user reads: the `Report` object and its text, JSON, HTML, folded-stack and diff views."""

from hloflops.report import communication, folded, html, roofline, text
from hloflops.report.report import VIEWS

VIEWS.update(summary=text.render_summary, html=html.render_html, folded=folded.folded_stacks,
             notebook=html.render_notebook,
             communication=communication.communication_dict, roofline=roofline.roofline)
