"""What instructors and students read: feedback pages, the LMS export, the class report."""
