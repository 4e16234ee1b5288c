"""The modal screens: dialogs, consent, help, quit."""
