"""Generated fault schedules: the generator, the explore loop and the shrinker."""
