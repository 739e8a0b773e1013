"""What the API (``service``) and the learner (``workers``) share: settings, metrics, the Redis
client and every Redis adapter (``octr.store``). Neither of them imports the other, and the
pure learning core (``online_ctr``) imports none of them."""
