# Per-thread stacks. Every instance sharing the memory starts with the same __stack_pointer (a
# per-instance global the linker initialises); each thread moves its own to a region the engine
# gave it before running anything. C cannot write that global, so this is assembly.
  .globaltype __stack_pointer, i32

  .globl fa_set_stack
  .export_name fa_set_stack, fa_set_stack
  .type fa_set_stack,@function
fa_set_stack:
  .functype fa_set_stack (i32) -> ()
  local.get 0
  global.set __stack_pointer
  end_function
