"""Grade on submit (`grader serve`): the exchange, the course's policy, the queue, the service."""
