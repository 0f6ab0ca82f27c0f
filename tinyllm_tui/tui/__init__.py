"""The Textual app: screens, widgets, styles and message catalogues."""
